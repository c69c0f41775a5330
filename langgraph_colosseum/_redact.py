"""What the package says about itself is safe to show: no password, no terminal control.

Every text that leaves the package passes through here: exception messages of
our hierarchy (`ColosseumError.__str__`), the lines of the `langgraph_colosseum`
logger (a filter installed on import), and everything the `colosseum` command
prints. One copy of each rule, so a new output cannot forget one.

Example:
    >>> redact("postgresql://app:hunter2@db:5432/prod")
    'postgresql://app:***@db:5432/prod'
    >>> printable("hi\\x1b[2J")
    'hi\\\\x1b[2J'
"""

from __future__ import annotations

import logging
import re
import unicodedata

MASK = "***"

# scheme://user:SECRET@host: the secret runs to the last "@" before a blank or
# quote, so a password holding "@" is hidden whole (over-hiding a host is fine).
# An empty password (user:@host, the embedded server's) has nothing to hide.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s/@:'\"]*:)[^\s'\"]+(?=@)")
# password=SECRET in a key-value DSN (quoted or not) or a URL query string;
# also PGPASSWORD=... and redis-style requirepass lines.
_KEYWORD_PASSWORD = re.compile(
    r"((?:password|passwd|requirepass)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.IGNORECASE
)

# Bidirectional overrides reorder what a terminal shows; they are controls too.
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def redact(text: object) -> str:
    """`text` with the password of every URL or key-value DSN in it replaced by ***."""
    out = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK, str(text))
    return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, out)


def printable(text: object, *, keep_newlines: bool = True) -> str:
    """`text` with control characters shown as escapes (`\\x1b`), never sent raw.

    A message stored in a thread may hold terminal escapes (clear the screen,
    set the window title, a fake prompt); an audit trail must show them, not
    obey them. Newlines and tabs stay (unless `keep_newlines` is False).
    """
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char in "\n\t" and keep_newlines:
            out.append(char)
        elif unicodedata.category(char) == "Cc" or char in _BIDI or char in "\u2028\u2029":
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object, *, keep_newlines: bool = True) -> str:
    """Both: no password, no control characters."""
    return printable(redact(text), keep_newlines=keep_newlines)


class RedactingFilter(logging.Filter):
    """Rewrites each record of our logger into its safe form (see `safe`).

    The message is formatted here, once, so a password inside an argument (an
    exception quoting a URL) is caught as well as one in the format string.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = safe(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_text is None and record.exc_info[1] is not None:
            # Tracebacks are formatted by the handler, which uses exc_text when set.
            record.exc_text = safe(logging.Formatter().formatException(record.exc_info))
        return True


LOGGER = logging.getLogger("langgraph_colosseum")
if not any(isinstance(f, RedactingFilter) for f in LOGGER.filters):
    LOGGER.addFilter(RedactingFilter())
