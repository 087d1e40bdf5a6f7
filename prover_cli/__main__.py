from prover_cli.cli import main

main()
