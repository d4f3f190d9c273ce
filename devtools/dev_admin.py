"""Create the development superuser ``admin`` with a generated password, printed once."""

from __future__ import annotations

import secrets

import django


def main() -> None:
    django.setup()
    from django.contrib.auth import get_user_model

    users = get_user_model()
    if users.objects.filter(is_superuser=True).exists():
        print(
            "A superuser already exists (its password was printed when it was created; "
            "reset it with `make manage ARGS='changepassword admin'`)."
        )
        return
    password = secrets.token_urlsafe(16)
    users.objects.create_superuser("admin", email="admin@localhost", password=password)
    print(f"Dev admin created: user 'admin', password '{password}' (shown only this once).")


if __name__ == "__main__":
    main()
