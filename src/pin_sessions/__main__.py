from pin_sessions.cli import main

raise SystemExit(main())
