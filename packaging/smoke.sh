#!/usr/bin/env bash
# The bundle smoke test: build the .deb, install it on this machine, and use the INSTALLED commands
# the way a user would, headless:
#   * /usr/bin/camillo and camillo-desktop point into /opt/camillo and report the project's version;
#   * the CLI creates a vault, writes and reads it; the bundled MCP server answers a real client;
#   * the app renders the demo vault to a PNG offscreen, and under Xvfb through the xcb plugin;
#   * the device key goes to the Secret Service (gnome-keyring, private D-Bus session) through the
#     bundled keyring's SecretService backend, and the vault opens with the device key alone;
#     without a Secret Service the keychain is refused rather than faked;
#   * the installed .desktop and metainfo validate; the icons are installed;
#   * the package uninstalls cleanly (unless --keep).
# Usage: bash packaging/smoke.sh [--no-build] [--keep]      (root, or sudo; Debian/Ubuntu)
#   --no-build   install the .deb already in dist/ instead of running scripts/package
#   --keep       leave the package installed at the end
# Run by tests/packaging/test_package_smoke.py when CAMILLO_PACKAGE_SMOKE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
build=1 keep=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    *) echo "usage: bash packaging/smoke.sh [--no-build] [--keep]" >&2; exit 2 ;;
  esac
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

checks=0
ok() { checks=$((checks + 1)); echo "  ok: $*"; }
fail() { echo "SMOKE FAILED: $*" >&2; exit 1; }

# The test runner's settings must not leak into what a user would run.
unset CAMILLO_HOME CAMILLO_KEYCHAIN CAMILLO_INSECURE_TEST_KDF CAMILLO_PASSPHRASE CAMILLO_NEW_PASSPHRASE \
  CAMILLO_RECOVERY_PHRASE CAMILLO_DEBUG QT_QPA_PLATFORM PYTHON_KEYRING_BACKEND DISPLAY WAYLAND_DISPLAY \
  DBUS_SESSION_BUS_ADDRESS PYTHONPATH PYTHONHOME VIRTUAL_ENV || true

tools=()
for t in desktop-file-validate:desktop-file-utils appstreamcli:appstream secret-tool:libsecret-tools \
         xvfb-run:xvfb xauth:xauth dbus-run-session:dbus gnome-keyring-daemon:gnome-keyring; do
  command -v "${t%%:*}" >/dev/null || tools+=("${t#*:}")
done
if [ ${#tools[@]} -gt 0 ]; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${tools[@]}" >/dev/null
fi

[ "$build" = 1 ] && bash scripts/package
PY="$ROOT/.venv/bin/python"   # reads pyproject.toml and looks at the screenshots (Pillow)
[ -x "$PY" ] || fail "no .venv: run bash scripts/setup (or drop --no-build)"
read -r NAME VERSION < <("$PY" -c '
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(p["name"], p["version"])')
DEB="$ROOT/dist/${NAME}_${VERSION}_$(dpkg --print-architecture).deb"
[ -f "$DEB" ] || fail "$DEB not found (run without --no-build)"

echo "== install $(basename "$DEB")"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --reinstall "$DEB" >/dev/null
dpkg-query -W -f='${Status} ${Version}' "$NAME" | grep -qx "install ok installed $VERSION" || fail "not installed"
ok "dpkg says $NAME $VERSION is installed"
[ "$(readlink -f /usr/bin/camillo)" = "/opt/$NAME/camillo" ] || fail "/usr/bin/camillo does not point into /opt/$NAME"
[ "$(readlink -f /usr/bin/camillo-desktop)" = "/opt/$NAME/camillo-desktop" ] || fail "/usr/bin/camillo-desktop"
ok "/usr/bin/camillo and /usr/bin/camillo-desktop -> /opt/$NAME"

TMP="$(mktemp -d)"
cleanup() { cd /; rm -rf "$TMP"; }
trap cleanup EXIT
export HOME="$TMP/home" XDG_DATA_HOME="$TMP/home/.local/share" XDG_CONFIG_HOME="$TMP/home/.config" \
  XDG_CACHE_HOME="$TMP/home/.cache" XDG_RUNTIME_DIR="$TMP/run"
mkdir -p "$HOME" "$XDG_DATA_HOME" "$XDG_CONFIG_HOME" "$XDG_CACHE_HOME" "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"
cd "$TMP"   # nothing from the source tree is importable from here
CLI=/usr/bin/camillo
APP=/usr/bin/camillo-desktop
PASS='smoke test passphrase, long enough'

echo "== versions"
[ "$($CLI --version)" = "camillo $VERSION" ] || fail "camillo --version: $($CLI --version)"
[ "$($APP --version)" = "camillo-desktop $VERSION" ] || fail "camillo-desktop --version"
ok "camillo --version / camillo-desktop --version say $VERSION"

echo "== the command line (no keychain: the sealed local fallback)"
CAMILLO_KEYCHAIN=none CAMILLO_PASSPHRASE="$PASS" $CLI init "$TMP/plain" --name smoke-box > "$TMP/init.out" 2>&1 \
  || { cat "$TMP/init.out"; fail "camillo init"; }
vid="$(sed -n 's/^vault id \([0-9a-f]*\)$/\1/p' "$TMP/init.out")"
[ -n "$vid" ] || fail "camillo init printed no vault id"
[ -f "$XDG_DATA_HOME/camillo/vaults/$vid/installation.cbor" ] || fail "local state not in \$XDG_DATA_HOME/camillo"
ok "camillo init created a vault; local state in \$XDG_DATA_HOME/camillo/vaults/<id>/"
printf '%s\n' '{"type":"fact","key":"work/project","value":"Artemis"}' \
  | CAMILLO_KEYCHAIN=none CAMILLO_PASSPHRASE="$PASS" $CLI add "$TMP/plain" --compartment work >/dev/null
CAMILLO_KEYCHAIN=none CAMILLO_PASSPHRASE="$PASS" $CLI facts "$TMP/plain" | grep -q "work/project.*Artemis" \
  || fail "camillo facts does not show the fact just added"
CAMILLO_KEYCHAIN=none CAMILLO_PASSPHRASE="$PASS" $CLI verify "$TMP/plain" >/dev/null || fail "camillo verify"
ok "camillo add / facts / verify"

echo "== camillo mcp (the bundled MCP server, driven by the MCP SDK's client over stdio)"
CAMILLO_KEYCHAIN=none CAMILLO_PASSPHRASE="$PASS" $CLI grant "$TMP/plain" --agent smoke --compartment work \
  --level read --out "$TMP/smoke.grant" >/dev/null 2>&1
CAMILLO_KEYCHAIN=none timeout 120 "$PY" - "$CLI" "$TMP/plain" "$TMP/smoke.grant" <<'EOF' || fail "camillo mcp"
import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters

cli, vault, grant = sys.argv[1:]


async def main():
    params = StdioServerParameters(command=cli, args=["mcp", vault, "--grant", grant], env=dict(os.environ))
    async with Client(params) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"search_memory", "list_facts", "grant_info"} <= tools, tools
        result = await client.call_tool("list_facts", {})
        assert not result.is_error, result.content
        text = json.dumps(result.structured_content) + " ".join(getattr(c, "text", "") for c in result.content)
        assert "Artemis" in text, text[:500]
        print(f"  {len(tools)} tools; list_facts returns the fact")


anyio.run(main)
EOF
ok "camillo mcp: the SDK client lists the tools and calls list_facts"

shot_check() {  # PNG, width x height, and a real picture (many colours, not a blank window)
  "$PY" - "$1" <<'EOF' || fail "screenshot $1"
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
colours = len(img.getcolors(1 << 24))
print(f"  {sys.argv[1]}: {img.width}x{img.height}, {colours} colours")
assert img.size == (1280, 800), img.size
assert colours > 200, "looks blank"
# the content area (light theme) holds text and badges: many dark pixels, not an empty pane
dark = sum(img.crop((226, 120, 900, 760)).convert("L").histogram()[:100])
assert dark > 2000, f"no text in the content area ({dark} dark pixels)"
EOF
}

echo "== the app, headless"
CAMILLO_KEYCHAIN=none QT_QPA_PLATFORM=offscreen timeout 120 $APP --demo --theme light --screenshot "$TMP/offscreen.png" \
  2> >(grep -v propagateSizeHints >&2) || fail "camillo-desktop --demo --screenshot (offscreen)"
shot_check "$TMP/offscreen.png"
ok "camillo-desktop renders the demo timeline offscreen"
CAMILLO_KEYCHAIN=none timeout 120 xvfb-run -a -s "-screen 0 1400x900x24" \
  $APP --demo --theme light --view facts --screenshot "$TMP/xcb.png" 2> >(grep -v propagateSizeHints >&2) \
  || fail "camillo-desktop under Xvfb (xcb)"
shot_check "$TMP/xcb.png"
ok "camillo-desktop renders under Xvfb through the bundled xcb plugin"

echo "== the device key in the Secret Service (gnome-keyring, private D-Bus session)"
export SMOKE_TMP="$TMP" SMOKE_PASS="$PASS" CLI
dbus-run-session -- bash -euo pipefail -c '
  fail() { echo "SMOKE FAILED: $*" >&2; exit 1; }
  echo -n smoke-keyring | gnome-keyring-daemon --unlock --components=secrets >/dev/null
  # keyring discovers its backends itself (entry points in the bundled metadata); =os refuses any
  # fallback, so this succeeds only with a real OS keychain.
  CAMILLO_KEYCHAIN=os CAMILLO_PASSPHRASE="$SMOKE_PASS" $CLI init "$SMOKE_TMP/kc" --name smoke-laptop \
    > "$SMOKE_TMP/kc.out" 2>&1 || { cat "$SMOKE_TMP/kc.out"; fail "camillo init with CAMILLO_KEYCHAIN=os"; }
  vid="$(sed -n "s/^vault id \([0-9a-f]*\)$/\1/p" "$SMOKE_TMP/kc.out")"
  [ ! -e "$XDG_DATA_HOME/camillo/vaults/$vid/device-key.bin" ] || fail "the device key was sealed locally"
  [ ! -e "$XDG_DATA_HOME/python_keyring" ] || fail "a plaintext keyring file appeared"
  secret-tool search --all service vmem > "$SMOKE_TMP/items" 2>&1 || true
  grep -q "attribute.username = $vid/" "$SMOKE_TMP/items" || { cat "$SMOKE_TMP/items"; fail "no vmem item in the Secret Service"; }
  grep -q "attribute.application = Python keyring library" "$SMOKE_TMP/items" || fail "not written by keyring"
  echo "  ok: the device key is an item of the Secret Service (service vmem, user $vid/...)"
  printf "%s\n" "{\"type\":\"fact\",\"key\":\"user/home_city\",\"value\":\"Porto\"}" \
    | CAMILLO_KEYCHAIN=os $CLI add "$SMOKE_TMP/kc" --device >/dev/null || fail "add --device"
  CAMILLO_KEYCHAIN=os $CLI facts "$SMOKE_TMP/kc" --device </dev/null | grep -q "user/home_city.*Porto" \
    || fail "facts --device"
  echo "  ok: written and read with the device key alone (no passphrase)"
  PYTHON_KEYRING_BACKEND=keyring.backends.SecretService.Keyring CAMILLO_KEYCHAIN=os \
    $CLI facts "$SMOKE_TMP/kc" --device </dev/null | grep -q Porto || fail "SecretService backend by name"
  echo "  ok: the bundled keyring.backends.SecretService.Keyring opens it when named explicitly"
  secret-tool clear service vmem
  if $CLI facts "$SMOKE_TMP/kc" --device </dev/null > "$SMOKE_TMP/gone.out" 2>&1; then
    fail "the vault opened with --device after its key was removed from the Secret Service"
  fi
  echo "  ok: with its Secret Service item deleted, --device no longer opens the vault"
' 2> >(grep -v "Failed to set fd limit" >&2) || fail "keychain checks"
checks=$((checks + 4))
set +e
CAMILLO_KEYCHAIN=os CAMILLO_PASSPHRASE="$PASS" $CLI init "$TMP/nokc" > "$TMP/nokc.out" 2>&1
rc=$?
set -e
[ "$rc" = 3 ] && grep -qi "keychain" "$TMP/nokc.out" || { cat "$TMP/nokc.out"; fail "no Secret Service: expected exit 3, got $rc"; }
ok "without a Secret Service, CAMILLO_KEYCHAIN=os refuses (exit 3) instead of a fallback backend"

echo "== freedesktop files"
desktop-file-validate "/usr/share/applications/org.camillo.Camillo.desktop" || fail "desktop-file-validate"
appstreamcli validate --no-net "/usr/share/metainfo/org.camillo.Camillo.metainfo.xml" >/dev/null \
  || fail "appstreamcli validate"
for size in 16 24 32 48 64 128 256 512; do
  [ -f "/usr/share/icons/hicolor/${size}x${size}/apps/org.camillo.Camillo.png" ] || fail "icon ${size}"
done
[ -f /usr/share/icons/hicolor/scalable/apps/org.camillo.Camillo.svg ] || fail "scalable icon"
ok "desktop entry and metainfo validate; icons installed"

if [ "$keep" = 0 ]; then
  echo "== uninstall"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$NAME" >/dev/null
  [ ! -e "/opt/$NAME" ] && [ ! -e /usr/bin/camillo ] && [ ! -e /usr/bin/camillo-desktop ] \
    && [ ! -e /usr/share/applications/org.camillo.Camillo.desktop ] || fail "files left after purge"
  ok "apt-get purge removes /opt/$NAME, the commands and the desktop entry"
fi
echo "smoke: $checks checks passed"
