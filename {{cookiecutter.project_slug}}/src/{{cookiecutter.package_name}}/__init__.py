"""{{ cookiecutter.project_name }}.

Kept free of imports on purpose: `python main.py --help` and the doctor stay fast because
torch and Lightning load only where they are used.
"""

__version__ = "0.1.0"
