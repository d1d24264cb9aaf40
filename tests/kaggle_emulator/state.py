"""The emulator's whole state behind one lock: accounts, datasets, blobs, kernels, faults."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.kaggle_emulator.accelerators import Accelerator
from tests.kaggle_emulator.blobs import BlobStore
from tests.kaggle_emulator.calls import CallLog
from tests.kaggle_emulator.data_sources import DataSources
from tests.kaggle_emulator.datasets import DatasetRegistry, DatasetTiming
from tests.kaggle_emulator.faults import Faults
from tests.kaggle_emulator.first_contact import FirstContact
from tests.kaggle_emulator.kernels import KernelLimits, KernelRegistry
from tests.kaggle_emulator.links import KAGGLE, ORCHESTRATOR, Links
from tests.kaggle_emulator.options import EmulatorOptions
from tests.kaggle_emulator.packages import PackageIndex
from tests.kaggle_emulator.quota import QuotaWeek
from tests.kaggle_emulator.runner import SessionRunner
from tests.kaggle_emulator.user_secrets import UserSecrets


@dataclass
class CallContext:
    """Who is calling, where the server is, and when."""

    user: str
    base_url: str
    now: float


class EmulatorState:
    def __init__(
        self,
        root: Path,
        options: EmulatorOptions,
        runner: SessionRunner,
        session_tokens: dict[int, str] | None = None,
    ) -> None:
        # Each running session's own API token (KAGGLE_API_V1_TOKEN), by session id.
        self.session_tokens = session_tokens if session_tokens is not None else {}
        self.root = root
        self.options = options
        self.clock = options.clock
        self.lock = threading.RLock()
        self.faults = Faults()
        self.calls = CallLog(options.rate_limit_per_minute, options.rate_limit_google_body)
        self.internal_errors: list[str] = []  # tracebacks of emulator bugs; tests assert none
        # Download and upload URLs carry this instead of credentials, like signed URLs.
        self.url_secret = secrets.token_urlsafe(12)
        self.blobs = BlobStore(root / "blobs")
        self.datasets = DatasetRegistry(
            root / "datasets",
            DatasetTiming(
                options.dataset_processing_seconds,
                options.dataset_not_found_seconds,
                # Processing is charged for the stand-in size too (`link_size_scale`).
                options.dataset_bytes_per_second / options.link_size_scale
                if options.dataset_bytes_per_second
                else None,
            ),
            options.unpack_archives,
            self.faults.take_dataset_outcome,
            options.private_storage_bytes,
        )
        self.secrets = UserSecrets()
        self.links = Links(
            {
                ORCHESTRATOR: {
                    "up": options.orchestrator_upload_bytes_per_second,
                    "down": options.orchestrator_download_bytes_per_second,
                },
                KAGGLE: {"up": options.session_upload_bytes_per_second, "down": None},
            },
            options.link_size_scale,
        )
        # What a kernel with internet installs its requirements from (packages.py).
        self.packages = PackageIndex(options.package_index, options.package_download_seconds)
        # Where a running kernel reaches the API (its own link); set by the emulator at start.
        self.inside_url: str | None = None
        for user, values in options.user_secrets.items():
            for label, value in values.items():
                self.secrets.set(user, label, value)
        for kernel_ref, labels in options.attached_secrets.items():
            for label in labels:
                self.secrets.attach(kernel_ref, label)
        epoch = options.week_epoch if options.week_epoch is not None else self.clock.now()
        limits = KernelLimits(
            max_gpu_sessions=options.max_gpu_sessions,
            max_cpu_sessions=options.max_cpu_sessions,
            gpu_overflow=options.gpu_overflow,
            pinned_sources=options.pinned_sources,
            mount_layout=options.mount_layout,
            queue_seconds=options.queue_seconds,
            default_session_seconds=options.default_session_seconds,
            max_session_seconds={
                Accelerator.NONE: options.max_session_seconds,
                Accelerator.GPU: options.max_session_seconds,
                Accelerator.TPU: options.max_tpu_session_seconds,
            },
            allowance_seconds={
                Accelerator.GPU: options.gpu_allowance_seconds,
                Accelerator.TPU: options.tpu_allowance_seconds,
            },
            week=QuotaWeek(epoch, options.week_seconds),
            withheld_accelerators=frozenset(options.withheld_accelerators),
            working_bytes_cap=options.working_bytes_cap,
        )
        self.kernels = KernelRegistry(
            root / "sessions",
            runner,
            self.datasets,
            self.secrets,
            limits,
            self.faults,
            self.session_tokens if options.session_tokens else None,
            FirstContact(
                refused_push_leaves_shell=options.refused_push_leaves_shell,
                cut_keeps_output=options.cut_keeps_output,
                phone_verified=options.phone_verified,
                internet_off_blocks_api=options.internet_off_blocks_api,
            ),
            DataSources(
                models=dict(options.models),
                competitions=dict(options.competitions),
                kernel_mount_layout=options.kernel_mount_layout,
                pinned_kernel_sources_dropped=options.pinned_kernel_sources_dropped,
            ),
        )
        (root / "sessions").mkdir(parents=True, exist_ok=True)

    def tokens(self) -> dict[str, str]:
        """Bearer token -> who it authenticates: users' API tokens, and each session's own
        token, which acts as `kaggle-session-<id>` (never as the kernel's owner)."""
        session = {token: f"kaggle-session-{sid}" for sid, token in self.session_tokens.items()}
        return {**self.options.api_tokens, **session}

    def reconcile(self) -> None:
        with self.lock:
            self.kernels.reconcile(self.clock.now())

    def file_url(self, base_url: str, *parts: str) -> str:
        return "/".join([base_url, "files", self.url_secret, *parts])

    def upload_url(self, base_url: str, token: str) -> str:
        return f"{base_url}/upload/{self.url_secret}/{token}"
