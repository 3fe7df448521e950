from saipling.cli.main import main

if __name__ == "__main__":  # (also keeps a spawned chunking worker from running the CLI)
    main()
