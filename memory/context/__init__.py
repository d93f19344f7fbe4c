"""The context the model gets: the token budget's zones, the adaptive index (index_builder), the
rolling summary of a long conversation, result compression and the memory tools.
"""
