"""What an operator touches: the `spectower` command line, the Streamlit console and the demo.
May import every other package; nothing imports it."""
