#!/usr/bin/env bash
# install.sh of Headroom's bundle (packaging/build_bundle.py puts it at the bundle's top): install
# the bundle it sits in for this user, no root. It copies the folder to
# $XDG_DATA_HOME/headroom/app (HEADROOM_APP_DIR to choose), links ~/.local/bin/headroom
# (HEADROOM_BIN_DIR) and registers the desktop entry, the icons and the GGUF MIME type
# (install-desktop.sh). Caches, settings and models stay in the user's XDG directories, never in the
# bundle. `./install.sh --uninstall` removes the copy, the link and the registration.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}
DEST=${HEADROOM_APP_DIR:-$DATA/headroom/app}
BINDIR=${HEADROOM_BIN_DIR:-$HOME/.local/bin}

if [ "${1:-}" = "--uninstall" ]; then
  XDG_DATA_HOME=$DATA bash "$HERE/install-desktop.sh" --uninstall
  if [ -L "$BINDIR/headroom" ] && [ "$(readlink "$BINDIR/headroom")" = "$DEST/headroom" ]; then
    rm -f "$BINDIR/headroom"
  fi
  rm -rf "$DEST"  # this script too, when it runs from there: bash keeps reading the open file
  echo "removed Headroom from $DEST (your caches, settings and models are kept)"
  exit 0
fi
[ -x "$HERE/headroom" ] || { echo "no headroom executable beside $0: run install.sh from the unpacked bundle" >&2; exit 1; }
if [ "$HERE" != "$DEST" ]; then
  mkdir -p "$(dirname "$DEST")"
  rm -rf "$DEST.new"
  cp -a "$HERE" "$DEST.new"
  rm -rf "$DEST"
  mv "$DEST.new" "$DEST"
fi
mkdir -p "$BINDIR"
ln -sfn "$DEST/headroom" "$BINDIR/headroom"
XDG_DATA_HOME=$DATA HEADROOM_BIN=$DEST/headroom HEADROOM_RESOURCES=$DEST/resources bash "$DEST/install-desktop.sh"
echo "installed Headroom in $DEST; start it from the application menu or as $BINDIR/headroom"
case ":$PATH:" in *":$BINDIR:"*) ;; *) echo "note: $BINDIR is not on your PATH" ;; esac
