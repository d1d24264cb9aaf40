"""Everything a test can configure about the emulated Kaggle account and its timings."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.kaggle_emulator.clock import Clock, SystemClock

HOUR = 3600.0
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class EmulatorOptions:
    # Accounts: username -> API key (Basic auth), and bearer access token -> username.
    users: dict[str, str] = field(default_factory=lambda: {"alice": "alice-key"})
    api_tokens: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0  # 0 picks a free port; 7777 is where KaggleEnv.TEST looks
    clock: Clock = field(default_factory=SystemClock)
    # Kaggle user secrets: username -> label -> value (kept out of repr), and the labels
    # attached to each kernel, "owner/slug" -> labels (Add-ons -> Secrets on Kaggle).
    user_secrets: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    attached_secrets: dict[str, list[str]] = field(default_factory=dict)

    # Kernels
    queue_seconds: float = 0.3  # how long a pushed session reads QUEUED before it starts
    max_gpu_sessions: int = 2
    gpu_overflow: str = "reject"  # "reject" like Kaggle, or "queue" to hold it QUEUED
    default_session_seconds: float = 12 * HOUR  # when the push names no timeout
    max_session_seconds: float = 12 * HOUR  # 9 h for TPU sessions
    max_tpu_session_seconds: float = 9 * HOUR
    grace_seconds: float = 2.0  # SIGTERM at the limit, SIGKILL this much later
    output_page_size: int = 20  # ListKernelSessionOutput's page size when none is asked
    max_output_files: int = 500  # the output listing stops here, as Kaggle's did
    max_cpu_sessions: int = 5  # "Maximum batch CPU session count of 5 reached."
    # Seconds a container takes to boot before the script starts; Kaggle's timer runs meanwhile.
    boot_seconds: float = 0.3
    # Old emulator convention: SaveKernel's url carries the session id as scriptVersionId.
    session_id_in_url: bool = False
    # For this long after a push, status without a version label still answers for the
    # version before (reads lag behind the latest version).
    status_lag_seconds: float = 1.0
    # Whether `owner/slug/N` dataset sources are accepted (False: reported invalid, unmounted).
    pinned_sources: bool = True
    # Where a dataset is mounted under /kaggle/input: "flat" (<slug>), "datasets"
    # (datasets/<owner>/<slug>, newer images) or "versioned" (... /<slug>/versions/<N>).
    mount_layout: str = "datasets"
    # Bytes a session may write to /kaggle/working (Kaggle: 20 GB); past it the session is
    # stopped with ERROR naming the limit (the wording is ours). None: no cap.
    working_bytes_cap: int | None = 20 * 10**9
    # Accelerators ("gpu", "tpu") a push asks for but its session runs without, on the standard
    # image: Kaggle did this to TPU pushes (kaggle-api #1197). Quota is charged as asked.
    withheld_accelerators: frozenset[str] = frozenset()
    # Kernel sessions carry their own API token (KAGGLE_API_V1_TOKEN), as on Kaggle.
    session_tokens: bool = True
    # Quota responses send zero durations (proto3 omits them; the old emulator did not).
    send_zero_fields: bool = False
    # Calls per user per minute before 429 with Retry-After; None: no limit.
    rate_limit_per_minute: float | None = 1200.0
    # A 429's body as Kaggle sends it (kaggle-api #931): {"error": {"code": 429, ...,
    # "status": "RESOURCE_EXHAUSTED"}}; False: the old {"code": 429, "message": ...}.
    rate_limit_google_body: bool = True
    # A kernel pushed with internet off cannot reach the API (Kaggle's sessions without
    # internet have no route out); False: every session can call back, as before.
    internet_off_blocks_api: bool = True
    # First contact with a real account (issue 17; docs/kaggle-emulator.md, "First contact"):
    # a refused first push leaves an empty kernel "shell" (later pushes: "Notebook not found",
    # GetKernel: 500);
    refused_push_leaves_shell: bool = False
    # a session cut at its limit ends CANCEL_ACKNOWLEDGED and keeps its partial output;
    cut_keeps_output: bool = False
    # an account without phone verification cannot push GPU or internet-enabled kernels;
    phone_verified: bool = True
    # a pinned kernel source (owner/slug/N) is accepted and the latest version mounted instead.
    pinned_kernel_sources_dropped: bool = False
    # Models ("owner/model/framework/variation/version" -> files) and competitions (slug ->
    # files) a push may mount (data_sources.py), and where kernel outputs are mounted:
    # "notebooks" (input/notebooks/<owner>/<slug>) or "flat" (input/<slug>, older images).
    models: dict[str, Path] = field(default_factory=dict)
    competitions: dict[str, Path] = field(default_factory=dict)
    kernel_mount_layout: str = "notebooks"
    python: str = sys.executable
    repo_root: Path = REPO_ROOT

    # Quota
    gpu_allowance_seconds: float = 30 * HOUR
    tpu_allowance_seconds: float = 20 * HOUR
    week_seconds: float = 7 * 24 * HOUR
    week_epoch: float | None = None  # start of quota week 0; None: the clock at start-up

    # Datasets
    dataset_processing_seconds: float = 1.0
    dataset_not_found_seconds: float = 0.3
    # Processing grows with a version's size: this many bytes a second on top of
    # dataset_processing_seconds (None: the fixed time whatever the size).
    dataset_bytes_per_second: float | None = None
    unpack_archives: bool = True
    dataset_files_page_size: int = 20
    # Bytes of private datasets (every version counts) a user may keep; None: no limit. Past it
    # Kaggle accepts an upload and never finishes it (kaggle-api #284, #424; datasets.py).
    private_storage_bytes: int | None = None

    # Links (links.py): bytes a second each way between Kaggle and the orchestrator's machine,
    # and from a running kernel up to Kaggle's storage; None: free (no time charged). Every
    # transferred byte is charged as `link_size_scale` bytes (a benchmark's stand-in sizes).
    # COSTS below holds the public figures; tests scale them.
    # The package index kernels with internet pip-install from (packages.py): a folder of
    # distributions (None: an empty index), each download held this long.
    package_index: Path | None = None
    package_download_seconds: float = 0.0
    orchestrator_upload_bytes_per_second: float | None = None
    orchestrator_download_bytes_per_second: float | None = None
    session_upload_bytes_per_second: float | None = None
    link_size_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.mount_layout not in ("flat", "datasets", "versioned"):
            raise ValueError("mount_layout must be flat, datasets or versioned")
        if self.kernel_mount_layout not in ("notebooks", "flat"):
            raise ValueError("kernel_mount_layout must be notebooks or flat")
        if self.gpu_overflow not in ("reject", "queue"):
            raise ValueError(f"gpu_overflow must be 'reject' or 'queue', not {self.gpu_overflow!r}")


# The figures a real account meets (docs/kaggle-emulator.md, "Costs", says where each is from).
MB = 10**6
COSTS = {
    # A 100 Mbit/s home line, both ways (the example; upload is often slower).
    "orchestrator_upload_bytes_per_second": 12.5 * MB,
    "orchestrator_download_bytes_per_second": 12.5 * MB,
    # A kernel writing to Kaggle's own storage inside Google's network (an assumption: no public
    # measurement found; 50 MB/s is a conservative in-cloud figure).
    "session_upload_bytes_per_second": 50 * MB,
    # Kaggle copies, unpacks and indexes a new version (an assumption; 60 s + 100 MB/s).
    "dataset_processing_seconds": 60.0,
    "dataset_bytes_per_second": 100 * MB,
    # Private datasets: "over 100 GB" per user (Developing Kaggle Notebooks, 2023, ch. 1).
    "private_storage_bytes": 100 * 10**9,
    "working_bytes_cap": 20 * 10**9,
    # A session's `pip install` of its requirements from the index: 35 s, a fresh install's
    # "usual 35 seconds (Colab timings)" (pathwaycom/pathway #26).
    "package_download_seconds": 35.0,
}


def scaled_costs(time_factor: float) -> dict[str, float | int]:
    """COSTS with every duration divided by `time_factor` (rates multiplied); sizes kept."""
    scaled: dict[str, float | int] = {}
    for name, value in COSTS.items():
        if name.endswith("bytes_per_second"):
            scaled[name] = value * time_factor
        elif name.endswith("_seconds"):
            scaled[name] = value / time_factor
        else:
            scaled[name] = value
    return scaled
