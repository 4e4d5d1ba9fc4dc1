"""``python -m bench.http2``: Herald's FCM client on HTTP/1.1 against HTTP/2 clients, by CPU per
request, against an HTTP/2 FCM stand-in (issue 20, point 7; ``__main__``'s help tells the method).

- ``__main__``: the command line and the alternating runs;
- ``rows``: what each row sends with (Herald's ``FcmClient``, httpx, niquests);
- ``measure``: one row's timed window in its own pinned process, its CPU and its connections;
- ``server``: the stand-in and the project's emulator, started, reset and judged by their counts;
- ``standin``: the stand-in itself (hypercorn, TLS, ALPN ``h2`` and ``http/1.1``);
- ``tls``: its throwaway self-signed certificate;
- ``report``: medians, ratios, the Markdown table and the JSON record.
"""
