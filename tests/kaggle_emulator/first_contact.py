"""What a real account meets on its first jobs, that an emulator otherwise makes easy (issue 17).

Each rule has a switch in `EmulatorOptions`, off unless a test turns it on; the sources are cited
in docs/kaggle-emulator.md ("First contact"):

- `refused_push_leaves_shell`: a refused first push of a new slug leaves an empty kernel
  "shell": every later push to that slug answers `Notebook not found` (the CLI prints it as
  `Kernel push error: Notebook not found`) and GetKernel answers 500.
- `cut_keeps_output`: a session cut at its limit ends CANCEL_ACKNOWLEDGED, and what it wrote
  into /kaggle/working before the cut is its output (`push -t 60` field logs).
- `phone_verified=False`: the account cannot push a GPU or internet-enabled kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.kaggle_emulator.accelerators import Accelerator

# Kaggle's push error for a shell slug, as `kaggle kernels push` prints it after "Kernel push
# error: ".
SHELL_PUSH_ERROR = "Notebook not found"
SHELL_GET_ERROR = "Internal server error"
# The wording is ours: Kaggle's web UI hides the accelerator and internet options until the
# phone is verified (instructlab #355, fastai course-v3 #347); the API's text is unpublished.
PHONE_REFUSAL = (
    "Phone verification is required to use accelerators or internet access. Verify your phone "
    "number at https://www.kaggle.com/settings and try again."
)


@dataclass
class FirstContact:
    refused_push_leaves_shell: bool = False
    cut_keeps_output: bool = False
    phone_verified: bool = True
    internet_off_blocks_api: bool = True
    # "owner/slug" of kernels whose first push was refused: empty, and broken for good.
    shells: set[str] = field(default_factory=set)

    def phone_refusal(self, accelerator: Accelerator, enable_internet: bool | None) -> str | None:
        if self.phone_verified:
            return None
        if accelerator is not Accelerator.NONE or enable_internet:
            return PHONE_REFUSAL
        return None

    def refused(self, ref: str, known: bool) -> None:
        """A push to `ref` was refused; a kernel that never existed becomes a shell."""
        if self.refused_push_leaves_shell and not known:
            self.shells.add(ref)

    def is_shell(self, ref: str) -> bool:
        return ref in self.shells
