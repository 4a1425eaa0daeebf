"""The toy workload's own report page, found by report.pages.discover next to the workload's code."""
from report.pages import Page, rows_for, workload_page_applies


def context(table):
    rows = rows_for(table, "toy")
    return {"n_toy": len(rows), "hardware": sorted(map(str, rows["hardware"].dropna().unique()))}


PAGE = Page(slug="toy", title="Toy", template="toy.html", context=context, applies=workload_page_applies("toy"),
            order=12, workload="toy", link=lambda row: f"toy.html#toy-{row['hardware']}")
