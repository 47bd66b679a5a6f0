"""The machinery beside your code: checkpoints, exact resume, batch-size tuning, hardware checks,
the doctor, TensorBoard pictures and the CLI's defaults.

You need not open it to change the model or the data: it names neither, and its tests run on
fixtures of their own. Kept free of imports, so the doctor can check torch before loading it.
"""
