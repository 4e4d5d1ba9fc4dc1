"""``python -m bench.transport``: firebase-admin's ``send_each_async`` against Herald's FCM path,
each on one core, against the FCM emulator on another (the CLI's help tells the whole method).

- ``__main__``: the command line;
- ``rows``: what each row sends with (the only module that imports Herald's sending code);
- ``records``: the ``Plan`` a row runs and the ``Measurement`` it returns;
- ``measure``: one row's timed window in its own pinned process, and its CPU accounting;
- ``runner``: the rows round-robin against a reset emulator, each judged by the emulator's count;
- ``emulator``: the pinned FCM emulator;
- ``report``: medians, the Markdown table, warnings and the JSON record;
- ``profiling``: ``--profile``, recorded in the row's process and summarized by library.
"""
