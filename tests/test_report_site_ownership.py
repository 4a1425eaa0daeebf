"""report.build and the sweep's report stage never write over a directory they did not make."""

from __future__ import annotations

import pytest

from jobs import files, finish
from report import build
from tests.helpers import _cli, _files
from tests.test_report_links_and_credentials import sweep_dir  # noqa: F401  (the fixture)

# --------------------------------------------------------------------------- a report over a user's own page

def test_report_build_never_replaces_a_page_of_the_users_own(tmp_path, sweep_dir, capsys):  # noqa: F811
    """--out DIR where DIR holds the user's own index.html (and style sheet): exit 2 naming them, nothing written
    or changed; a directory report.build wrote (its stamp) is built again, as is a site built before the stamp."""
    out = tmp_path / "out"
    (out / "assets").mkdir(parents=True)
    (out / "index.html").write_text("<html><title>my page</title></html>")
    (out / "assets" / "style.css").write_text("body {}")
    (out / "notes.txt").write_text("mine")
    before = _files(out)
    rc, err = _cli(capsys, build.main, str(sweep_dir), "--out", str(out))
    assert rc == 2 and "Traceback" not in err, err
    assert (f"error: {out} holds assets/style.css, index.html, which the report would replace, but report.build did "
            f"not write it (it has no {build.STAMP})") in err, err
    assert _files(out) == before

    site = tmp_path / "site"
    rc, err = _cli(capsys, build.main, str(sweep_dir), "--out", str(site))
    assert rc == 0 and (site / build.STAMP).is_file(), err
    (site / "notes.txt").write_text("mine")   # a file the site does not have stays
    assert _cli(capsys, build.main, str(sweep_dir), "--out", str(site))[0] == 0
    assert (site / "notes.txt").read_text() == "mine"
    (site / build.STAMP).unlink()   # as built before the stamp existed: its index.html is the report's
    assert _cli(capsys, build.main, str(sweep_dir), "--out", str(site))[0] == 0
    assert (site / build.STAMP).is_file()


def test_publishing_never_replaces_a_page_of_the_users_own(tmp_path, sweep_dir, capsys):  # noqa: F811
    """report.publish SITE TARGET where TARGET holds the user's own index.html: exit 2 naming it, nothing changed;
    a target it published to before (the site's stamp came with it) is published to again."""
    from report import publish

    site = tmp_path / "site"
    assert _cli(capsys, build.main, str(sweep_dir), "--out", str(site))[0] == 0
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("<h1>mine</h1>")
    rc, err = _cli(capsys, publish.main, str(site), str(www))
    assert rc == 2 and "the target" in err and "holds index.html, which publishing would replace" in err, err
    assert (www / "index.html").read_text() == "<h1>mine</h1>" and len(list(www.iterdir())) == 1
    again = tmp_path / "again"
    assert _cli(capsys, publish.main, str(site), str(again))[0] == 0
    assert _cli(capsys, publish.main, str(site), str(again))[0] == 0


def test_the_sweeps_report_stage_never_replaces_a_page_of_the_users_own(sweep_dir, capsys):  # noqa: F811
    """runs/x/site/index.html of the user's own: the report stage says so (files.InTheWay, exit 1 in the sweep),
    and the page is kept."""
    (sweep_dir / "site").mkdir()
    (sweep_dir / "site" / "index.html").write_text("mine")
    with pytest.raises(files.InTheWay, match="holds index.html, which the report would replace"):
        finish.finish(sweep_dir)
    assert (sweep_dir / "site" / "index.html").read_text() == "mine"
    assert sorted(p.name for p in (sweep_dir / "site").iterdir()) == ["index.html"]
