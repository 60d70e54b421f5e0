"""The read path: the listRecords pipeline and its keyset cursor (query, cursor), hybrid feeds,
verified handles and profile records (identities, over the network interface in sources), and
a timeline as the page shows it (timeline, render). Imports the store only."""
