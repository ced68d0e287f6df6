"""A sweep job's console lines: each starts with the job's label (`#3 placement=post`), as
parallel jobs share the terminal; its train.log, its own, stays plain."""

from __future__ import annotations

import logging


class OneLine(logging.Formatter):
    """Each message on one line: a control character in it (a newline in a shared folder's name)
    is written as its escape (`\\n`), so no text from a name starts a line of train.log or the
    terminal of its own. A traceback keeps its lines: it comes from the code, not from a name."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        if not message.isprintable():
            record = logging.makeLogRecord({**record.__dict__,
                                            "message": "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)})
        return super().formatMessage(record)


class Labelled(logging.Formatter):
    """Another formatter's lines with a sweep job's label before each message."""

    def __init__(self, inner: logging.Formatter, label: str):
        super().__init__()
        self.inner, self.label = inner, label

    def format(self, record: logging.LogRecord) -> str:
        labelled = logging.makeLogRecord(record.__dict__)  # the file handler formats the record unlabelled
        labelled.msg, labelled.args = f"{self.label}  {record.getMessage()}", None
        return self.inner.format(labelled)


def label_console(label: str) -> None:
    """Put `label` before each line of the console handlers (not the file handlers); a reused
    worker's earlier label is replaced."""
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:
            inner = handler.formatter.inner if isinstance(handler.formatter, Labelled) else handler.formatter
            handler.setFormatter(Labelled(inner or logging.Formatter(), label))
