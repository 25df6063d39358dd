#!/usr/bin/env bash
# Put Headroom in the desktop's application menu for this user (no root): the desktop entry, the
# icon at every size in resources/icons plus the scalable one, and the GGUF MIME type, all under
# $XDG_DATA_HOME (default ~/.local/share). `--uninstall` removes what it put there.
# From a checkout (after `./dev setup`) it registers .venv/bin/headroom; the bundle's install.sh
# runs it with HEADROOM_BIN (the installed executable) and HEADROOM_RESOURCES (the bundle's resources/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}
BIN=${HEADROOM_BIN:-$ROOT/.venv/bin/headroom}
RES=${HEADROOM_RESOURCES:-$ROOT/resources}
APPS=$DATA/applications ICONS=$DATA/icons/hicolor MIME=$DATA/mime/packages

refresh() {
  command -v update-mime-database >/dev/null && update-mime-database "$DATA/mime" >/dev/null 2>&1 || true
  command -v update-desktop-database >/dev/null && update-desktop-database "$APPS" >/dev/null 2>&1 || true
  command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$ICONS" >/dev/null 2>&1 || true
}

if [ "${1:-}" = "--uninstall" ]; then
  rm -f "$APPS/headroom.desktop" "$ICONS/scalable/apps/headroom.svg" "$ICONS"/*/apps/headroom.png \
    "$MIME/headroom-gguf.xml"
  refresh
  echo "removed Headroom's desktop entry, icons and MIME type from $DATA"
  exit 0
fi
[ -x "$BIN" ] || { echo "headroom is not installed at $BIN: run ./dev setup first" >&2; exit 1; }
case "$BIN" in
  *[\"\`\$\\\|\&]*) echo "cannot write a desktop entry for a path with quotes, \$, \\, | or &: $BIN" >&2; exit 1 ;;
esac
mkdir -p "$APPS" "$ICONS/scalable/apps" "$MIME"
install -m 0644 "$RES/headroom.svg" "$ICONS/scalable/apps/headroom.svg"
for png in "$RES"/icons/hicolor/*/apps/headroom.png; do
  [ -f "$png" ] || continue
  size=$(basename "$(dirname "$(dirname "$png")")")
  install -D -m 0644 "$png" "$ICONS/$size/apps/headroom.png"
done
install -m 0644 "$RES/gguf-mime.xml" "$MIME/headroom-gguf.xml"
# The entry runs this headroom by absolute path (neither the venv nor the bundle is on the menu's
# PATH); a path with a space is quoted, as the desktop entry spec asks.
exec_path=$BIN
case "$BIN" in *" "*) exec_path="\"$BIN\"" ;; esac
sed "s|^Exec=headroom |Exec=$exec_path |" "$RES/headroom.desktop" > "$APPS/headroom.desktop"
chmod 0644 "$APPS/headroom.desktop"
refresh
echo "installed: $APPS/headroom.desktop (runs $BIN)"
