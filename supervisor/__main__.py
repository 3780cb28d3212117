from supervisor.cli.parser import main

raise SystemExit(main())
