"""Organizing: the topic tree (segmenting, grouping, labels, summaries, the map's layout) and the
time-and-topic hierarchy the model can walk.
"""
