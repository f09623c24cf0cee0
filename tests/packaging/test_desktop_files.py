"""The desktop entry, the AppStream metainfo and the icons: valid, and consistent with the app.

Runs ``desktop-file-validate`` and ``appstreamcli validate --no-net`` (Debian packages
desktop-file-utils and appstream, installed by scripts/setup) on the files in packaging/.  Fast;
part of every run.  Plain pytest on the main thread; no Qt.
"""

from __future__ import annotations

import configparser
import filecmp
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

from camillo_desktop.app import APP_ID

ROOT = Path(__file__).resolve().parents[2]
DESKTOP = ROOT / "packaging" / f"{APP_ID}.desktop"
METAINFO = ROOT / "packaging" / f"{APP_ID}.metainfo.xml"
HICOLOR = ROOT / "resources" / "icons" / "hicolor"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if not path:
        pytest.fail(f"{name} is missing: apt-get install {package} (bash scripts/setup installs it)")
    return path


def desktop_entry() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(DESKTOP, encoding="utf-8")
    return parser["Desktop Entry"]


def metainfo() -> ET.Element:
    return ET.parse(METAINFO).getroot()  # noqa: S314 - the repository's own file


def test_desktop_entry_validates():
    proc = subprocess.run([tool("desktop-file-validate", "desktop-file-utils"), str(DESKTOP)],
                          capture_output=True, text=True, timeout=60)
    # it exits 0 on hints and warnings too: any output at all is a finding
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), proc.stdout + proc.stderr


def test_metainfo_validates():
    proc = subprocess.run([tool("appstreamcli", "appstream"), "validate", "--no-net", str(METAINFO)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in proc.stdout.splitlines():
        assert not line.startswith(("E:", "W:")), proc.stdout


def test_ids_agree_with_the_app_and_the_project():
    entry = desktop_entry()
    assert entry["Icon"] == APP_ID
    assert entry["Exec"].split()[0] == "camillo-desktop" == entry["TryExec"]
    assert "camillo-desktop" in PROJECT["gui-scripts"]
    root = metainfo()
    assert root.findtext("id") == APP_ID
    assert root.findtext("launchable") == DESKTOP.name
    assert root.findtext("project_license") == PROJECT["license"]
    provided = {b.text for b in root.iter("binary")}
    assert provided == set(PROJECT["scripts"]) | set(PROJECT["gui-scripts"])


def test_the_current_version_has_release_notes():
    releases = metainfo().find("releases")
    versions = [r.get("version") for r in releases.findall("release")]
    assert versions and versions[0] == PROJECT["version"], (
        f"pyproject.toml is at {PROJECT['version']}: add a <release> for it at the top of {METAINFO.name}"
    )
    assert releases.find("release").find("description") is not None


def test_screenshots_point_at_committed_images_of_the_stated_size():
    images = list(metainfo().iter("image"))
    assert images
    for image in images:
        url = image.text.strip()
        assert url.startswith("https://") and "/raw/main/" in url, url
        local = ROOT / url.split("/raw/main/", 1)[1]
        assert local.is_file(), f"{url}: {local.relative_to(ROOT)} is not in the repository (bash scripts/screenshots)"
        with Image.open(local) as img:
            assert img.size == (int(image.get("width")), int(image.get("height"))), local


@pytest.mark.parametrize("size", [16, 24, 32, 48, 64, 128, 256, 512])
def test_hicolor_png_icons(size):
    path = HICOLOR / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
    assert path.is_file(), f"{path}: run python packaging/make_icons.py"
    with Image.open(path) as img:
        assert img.size == (size, size)
        rgba = img.convert("RGBA")
        assert rgba.getpixel((0, 0))[3] == 0, "the rounded corner should be transparent"
        assert rgba.getpixel((size // 2, size // 4))[3] == 255, "the tile should be opaque"


def test_scalable_icon_is_the_apps_svg():
    scalable = HICOLOR / "scalable" / "apps" / f"{APP_ID}.svg"
    source = ROOT / "camillo_desktop" / "resources" / "camillo.svg"
    assert filecmp.cmp(scalable, source, shallow=False), "stale: run python packaging/make_icons.py"
