"""`python -m readers.inspect`: the command (readers/inspect/command.py)."""
from readers.inspect.command import main

if __name__ == "__main__":
    main()
