"""Reading a channel: the Python client that polls transfer_data up to the checkpoint."""
