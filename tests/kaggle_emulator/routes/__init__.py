"""Every RPC the emulator serves, keyed by (service, method) as in /api/v1/<service>/<method>."""

from __future__ import annotations

from tests.kaggle_emulator.routes import blobs, datasets, kernels, quota
from tests.kaggle_emulator.routes.responses import Handler

ROUTES: dict[tuple[str, str], Handler] = {
    **kernels.ROUTES,
    **quota.ROUTES,
    **datasets.ROUTES,
    **blobs.ROUTES,
}
