"""Streamlit entry point: ``streamlit run app.py``. All logic lives in ``gradpick.ui``."""

from gradpick.ui.start import run

run()
