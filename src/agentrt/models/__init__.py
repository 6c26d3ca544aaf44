"""The models: the conversation's messages, the scripted model, and the HTTP providers."""
