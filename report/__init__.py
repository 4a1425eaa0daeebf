"""Static HTML report for accelsweep results.

Command line: ``python -m report.build [INPUTS...] --out site/``.
In-process: ``from report.build import build; index_html = build(table, out_dir)``.
Pages live in ``report.pages`` (one module + one template each); chart helpers in ``report.charts``.
"""
