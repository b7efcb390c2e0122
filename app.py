"""Streamlit entry point: ``streamlit run app.py``. All logic lives in ``gradpick.ui``."""

import streamlit as st

st.set_page_config(page_title="gradpick", layout="wide")
st.title("gradpick")
st.write("Exact input gradients for the images you pick from a batch.")
