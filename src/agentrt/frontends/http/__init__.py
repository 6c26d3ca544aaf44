"""The HTTP front-end: the API and the web chat page (origin ``chat-``)."""
