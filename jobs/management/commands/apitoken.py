"""``manage.py apitoken create|list|revoke``: bearer tokens for the JSON API and /metrics."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import tokens
from jobs.models import ApiToken


class Command(BaseCommand):
    help = "Create, list or revoke API tokens (the secret is printed once, at creation)."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
        create = verbs.add_parser("create", help="Create a token and print its secret once.")
        create.add_argument("name", metavar="NAME", help="Who or what will use it.")
        create.add_argument(
            "--read-only",
            action="store_true",
            help="Only reads (jobs, runs, /metrics): a dashboard's or a scraper's token.",
        )
        verbs.add_parser("list", help="List tokens (never their secrets).")
        revoke = verbs.add_parser("revoke", help="Delete a token: requests with it get 401.")
        revoke.add_argument("name", metavar="NAME")

    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"]
        if verb == "create":
            try:
                _token, secret = tokens.create(options["name"], read_only=options["read_only"])
            except ValidationError as exc:
                detail = "; ".join(" ".join(m) for m in exc.message_dict.values())
                raise CommandError(f"apitoken create: {detail}", returncode=2) from None
            # The secret alone on stdout, so `TOKEN=$(manage.py apitoken create ci)` works.
            self.stdout.write(secret)
        elif verb == "list":
            for token in ApiToken.objects.all():
                used = token.last_used_at.isoformat() if token.last_used_at else "never"
                scope = "read-only" if token.read_only else "read-write"
                self.stdout.write(f"{token.name}  {token.prefix}…  {scope}  last used {used}")
        elif not tokens.revoke(options["name"]):
            raise CommandError(f"apitoken revoke: no token named {options['name']!r}", returncode=1)
        else:
            self.stdout.write(f"revoked {options['name']}")
