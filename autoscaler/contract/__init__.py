"""The annotation contract: what service owners write on a Deployment and what the controller
writes back, as text, with the rules both are read by.

`codec` holds the controller's own documents (`status`, `state`): how they are written, and the
one way they are read back, used by the controller, `explain` and `list` alike.
"""
