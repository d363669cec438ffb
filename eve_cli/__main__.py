from eve_cli.cli import main

main()
