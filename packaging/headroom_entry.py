"""The script PyInstaller freezes (packaging/headroom.spec): Headroom's bundle entry point."""

from app.frozen import main

raise SystemExit(main())
