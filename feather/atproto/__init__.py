"""atproto protocol helpers: identifier syntax, identity resolution, XRPC."""
