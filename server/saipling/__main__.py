from saipling.cli import main

main()
