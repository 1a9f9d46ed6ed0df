"""MirrorMaker 2's rules, pure: replication policies (topic naming), topic and group
filters, what replicates where, and the wire format of MM2's own records."""
