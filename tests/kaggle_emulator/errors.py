"""The error every handler raises; the server turns it into Kaggle's `{"code", "message"}` body.

kagglesdk raises `requests.HTTPError(message)` when a JSON body has `code >= 400`, so the status
and the code always agree.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> dict[str, object]:
        return {"code": self.status, "message": self.message}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def forbidden(message: str) -> ApiError:
    return ApiError(403, message)
