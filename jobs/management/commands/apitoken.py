"""``manage.py apitoken create|list|revoke``: bearer tokens for the JSON API and /metrics."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from jobs import cli
from jobs.audit import Actor
from jobs.models import ApiToken
from jobs.web import tokens


class _Parser(CommandParser):
    """A verb's parser: a usage error is one line naming the argument, with exit status 2 (as
    the ``jobs`` command's), not Django's status 1."""

    def error(self, message: str) -> NoReturn:
        detail = " ".join(message.removeprefix("argument ").split())
        line = f"apitoken {self.prog.split()[-1]}: error: {detail}"
        if self.called_from_command_line:
            self.exit(2, f"{line}\n")  # to stderr, as Django reports a command's error
        raise CommandError(line, returncode=2)


class Command(BaseCommand):
    help = "Create, list or revoke API tokens (the secret is printed once, at creation)."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(
            dest="verb", metavar="VERB", required=True, parser_class=_Parser
        )
        create = verbs.add_parser("create", help="Create a token and print its secret once.")
        create.add_argument("name", metavar="NAME", help="Who or what will use it.")
        create.add_argument(
            "--read-only",
            action="store_true",
            help="Only reads (jobs, runs, /metrics): a dashboard's or a scraper's token.",
        )
        create.add_argument(
            "--expires",
            type=cli.duration,
            metavar="DURATION",
            help="Refused (401) after this long, e.g. 30d or 12h; default: never.",
        )
        verbs.add_parser("list", help="List tokens (never their secrets).")
        revoke = verbs.add_parser("revoke", help="Delete a token: requests with it get 401.")
        revoke.add_argument("name", metavar="NAME")

    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"]
        if verb == "create":
            try:
                _token, secret = tokens.create(
                    options["name"],
                    actor=Actor.cli(),
                    read_only=options["read_only"],
                    expires_in=_seconds(options["expires"]),
                )
            except ValidationError as exc:
                detail = cli.validation_detail(exc, {"name": "NAME"})
                raise CommandError(f"apitoken create: {detail}", returncode=2) from None
            # The secret alone on stdout, so `TOKEN=$(manage.py apitoken create ci)` works.
            self.stdout.write(secret)
        elif verb == "list":
            now = timezone.now()
            for token in ApiToken.objects.all():
                used = token.last_used_at.isoformat() if token.last_used_at else "never"
                scope = "read-only" if token.read_only else "read-write"
                self.stdout.write(
                    f"{token.name}  {token.prefix}…  {scope}  by {token.created_by or '-'}  "
                    f"{_expiry(token, now)}  last used {used}"
                )
        elif not tokens.revoke(options["name"], actor=Actor.cli()):
            raise CommandError(f"apitoken revoke: no token named {options['name']!r}", returncode=1)
        else:
            self.stdout.write(f"revoked {options['name']}")


def _seconds(value: int | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _expiry(token: ApiToken, now: datetime) -> str:
    if token.expires_at is None:
        return "never expires"
    verb = "expired" if token.expires_at <= now else "expires"
    return f"{verb} {token.expires_at.isoformat()}"
