"""HTTP: the XRPC methods, the timeline page, the Bluesky feed generator and its publishing, the
service-auth check, the outbound budget of reads and the FEED_SERVE gate. The top layer:
nothing in feeds imports it but the feature's init_app."""
