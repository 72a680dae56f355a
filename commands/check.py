"""``edgeport check``: a parity report against a baseline, the CI gate (``validate/gate/check.py``)."""

from __future__ import annotations

from pathlib import Path

from edgeport.commands.output import fail_with_list
from edgeport.text import for_terminal


def check(report_path: Path, baseline_path: Path, *, tolerances: list[str], update_baseline: bool) -> int:
    from edgeport.validate.gate.check import CheckTolerance, compare_reports, load_report, write_baseline

    tol = CheckTolerance.parse(tolerances)
    report = load_report(report_path, "report")
    if update_baseline:
        written = write_baseline(report_path, baseline_path)
        through = f" (through the link, to {written})" if written != Path(baseline_path).absolute() else ""
        print(for_terminal(f"baseline {baseline_path} updated from {report_path}{through}"))
        return 0
    baseline = load_report(baseline_path, "baseline")
    regressions = compare_reports(report, baseline, tol)
    if not regressions:
        print(for_terminal(f"no regression against {baseline_path}: {len(baseline.results)} rows checked"))
        return 0
    return fail_with_list(f"{len(regressions)} regression(s) against {baseline_path} (row: metric baseline -> now, or a check "
                          f"a row says it passed but failed):", regressions)
