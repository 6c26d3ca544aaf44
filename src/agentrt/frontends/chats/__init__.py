"""The chat front-ends: Telegram (origin ``tg-``) and Discord (origin ``dc-``)."""
