"""The one exception kvattn raises."""
import re


class KvattnError(ValueError):
    """A failed kvattn call: `status` is the kvattn_status code, `message` the library's message.

    Invalid arguments and unsupported combinations alike raise this (never NotImplementedError)."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.message = message
        self.status = status


def check(lib, status, renames=None):
    """Raise KvattnError with the library's last message unless `status` is KVATTN_OK.

    `renames` maps the C ABI's argument names to the Python ones the caller used (e.g. k_cache -> key_cache),
    so that the message names what the caller passed."""
    if status == 0:
        return
    message = lib.kvattn_last_error()
    message = message.decode("utf-8", "replace") if message else f"kvattn status {status}"
    if renames:
        pattern = r"\b(" + "|".join(map(re.escape, renames)) + r")\b"
        message = re.sub(pattern, lambda m: renames[m.group(1)], message)
    raise KvattnError(message, status)
