"""A process writing long lines for tests/gateway/test_whole_lines.py: `python -m tests.gateway.long_lines_writer
access|audit TAG COUNT SIZE [LOCK|AUDIT_FILE]` writes COUNT lines of about SIZE bytes, each naming TAG, as the
gateway does: access lines to stderr (LOCK: the group's lock file) or audit lines appended to AUDIT_FILE."""

from __future__ import annotations

import sys
from pathlib import Path

from gateway.observability.access_log import configure_logging, log_access
from gateway.observability.requests import RequestRecord
from gateway.observability.whole_lines import WholeLines
from policies.audit import AuditLog


def main(kind: str, tag: str, count: int, size: int, path: str = "") -> None:
    if kind == "access":
        configure_logging("info", Path(path) if path else None)
        for i in range(count):
            record = RequestRecord("GET", "/" + tag * size, request_id=f"{tag}-{i}", status=404)  # a long path
            log_access(record, "", record.started)
    else:
        audit = AuditLog(WholeLines.append_to(Path(path)))
        for i in range(count):
            audit.write({"request_id": f"{tag}-{i}", "prompt": tag * size})
        audit.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:])
