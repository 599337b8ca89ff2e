"""The product in this process: one module an entry point of the front door (``neurcam_dist.service``).

``fitting`` (fit, choose_k), ``explaining``, ``monitoring``, ``exporting``, ``predicting`` (which
hands Parquet to the one scorer, ``distributed.scoring``, when the table is large), ``demo`` and
``datasets`` (featurize_text, generate, sample); ``common`` holds what they share. Each imports its
heavy libraries inside the function that uses them, so ``neurcam --help`` loads none of them.
"""
