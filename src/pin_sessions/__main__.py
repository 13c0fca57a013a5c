from pin_sessions.program import main

raise SystemExit(main())
