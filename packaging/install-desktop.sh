#!/usr/bin/env bash
# Put Headroom in the desktop's application menu for this user (no root): the desktop entry, the
# scalable icon and the GGUF MIME type, all under $XDG_DATA_HOME (default ~/.local/share).
# Run after `./dev setup`; `--uninstall` removes what it put there.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}
BIN=${HEADROOM_BIN:-$ROOT/.venv/bin/headroom}
APPS=$DATA/applications ICONS=$DATA/icons/hicolor/scalable/apps MIME=$DATA/mime/packages

if [ "${1:-}" = "--uninstall" ]; then
  rm -f "$APPS/headroom.desktop" "$ICONS/headroom.svg" "$MIME/headroom-gguf.xml"
  echo "removed Headroom's desktop entry, icon and MIME type from $DATA"
  exit 0
fi
[ -x "$BIN" ] || { echo "headroom is not installed at $BIN: run ./dev setup first" >&2; exit 1; }
mkdir -p "$APPS" "$ICONS" "$MIME"
install -m 0644 "$ROOT/resources/headroom.svg" "$ICONS/headroom.svg"
install -m 0644 "$ROOT/packaging/gguf-mime.xml" "$MIME/headroom-gguf.xml"
# The entry runs this checkout's headroom by absolute path (the venv is not on the menu's PATH).
sed "s|^Exec=headroom |Exec=$BIN |" "$ROOT/resources/headroom.desktop" > "$APPS/headroom.desktop"
chmod 0644 "$APPS/headroom.desktop"
command -v update-mime-database >/dev/null && update-mime-database "$DATA/mime" >/dev/null 2>&1 || true
command -v update-desktop-database >/dev/null && update-desktop-database "$APPS" >/dev/null 2>&1 || true
echo "installed: $APPS/headroom.desktop (runs $BIN)"
