"""Streamlit entry point: ``streamlit run app.py``. All logic lives in ``gradpick.ui``."""

from gradpick.ui.page import main

main()
