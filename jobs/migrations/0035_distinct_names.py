# Names people read (jobs, blackout windows, API tokens) hold no invisible or format character
# (CHECK constraints, as 0032's), and no two of a kind read alike: each row stores its name's
# confusable skeleton (UTS #39, jobs.names.skeleton), unique. A row that breaks either rule
# already is renamed, never dropped: an invisible character is written out as its code point
# ("[U+200B]", as jobs.names.job_name_for names an entry key), then of rows whose names read
# alike the one with a plain ASCII name (else the oldest) keeps its name and each other gets
# "~<id>". A renamed job gets an audit entry, its platform beat entry follows it (as in 0032),
# and so does the beat entry a Celery configuration entry was written to (jobs.beat.configured
# finds it by the job's name).
#
# The skeleton is jobs.names.stored_skeleton itself, not a frozen copy: the stored column must be what
# the models compute. A change of its table (jobs/confusables.txt) needs a migration that
# recomputes every row.

import json
import re

import django.core.validators
from django.db import migrations, models
from django.utils import timezone

from jobs.values.names import stored_skeleton as skeleton

_INVISIBLE = re.compile(
    "[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160"
    "\u17b4-\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f"
    "\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
ACTOR = "code:migration 0035"


def _visible(name, max_length):
    return _INVISIBLE.sub(lambda m: f"[U+{ord(m.group()):04X}]", name)[:max_length]


def _suffixed(name, pk, max_length, taken):
    for n in range(1, 1000):
        suffix = f"~{pk}" + "~" * (n - 1)
        candidate = name[: max_length - len(suffix)] + suffix
        if skeleton(candidate) not in taken:
            return candidate
    raise RuntimeError(f"no free name for row {pk} ({name!r})")


def _renamed(model):
    """(row, old name) for each row renamed; every row's skeleton stored."""
    max_length = model._meta.get_field("name").max_length
    rows = list(model.objects.order_by("pk"))
    taken, renamed = set(), []
    # A plain ASCII name keeps its name before a look-alike, however much older the look-alike.
    for row in sorted(rows, key=lambda r: (not r.name.isascii(), r.pk)):
        old = row.name
        name = _visible(old, max_length)
        if skeleton(name) in taken:
            name = _suffixed(name, row.pk, max_length, taken)
        taken.add(skeleton(name))
        row.name, row.name_skeleton = name, skeleton(name)
        row.save(update_fields=["name", "name_skeleton"])
        if name != old:
            renamed.append((row, old))
    return renamed


def rename_names_that_read_alike(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    AuditEntry = apps.get_model("jobs", "AuditEntry")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")

    def audit(old, new, **where):
        AuditEntry.objects.create(
            actor=ACTOR, source="code", action="edit", before={"name": old}, after={"name": new},
            **where,
        )  # fmt: skip

    for window, old in _renamed(apps.get_model("jobs", "Blackout")):
        audit(old, window.name, target=f"blackout:{window.name}")
    for token, old in _renamed(apps.get_model("jobs", "ApiToken")):
        audit(old, token.name, target=token.name)
    jobs = _renamed(Job)
    for job, old in jobs:
        audit(old, job.name, job=job, job_name=job.name)
        if job.periodic_task_id is None:
            continue
        if not job.adopted:
            PeriodicTask.objects.filter(pk=job.periodic_task_id).update(
                name=f"job:{job.name}", kwargs=json.dumps({"job": job.name})
            )
        elif job.configured:
            PeriodicTask.objects.filter(pk=job.periodic_task_id, name=old).update(name=job.name)
    if jobs:
        PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


def _skeleton_field():
    return models.TextField(
        default="",
        editable=False,
        help_text="How the name reads (jobs.names.skeleton): unique, so no two names read alike.",
    )


class Migration(migrations.Migration):

    dependencies = [
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        ('jobs', '0034_incidents_follow_their_cause'),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken', name='name_skeleton', field=_skeleton_field(),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='blackout', name='name_skeleton', field=_skeleton_field(),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='job', name='name_skeleton', field=_skeleton_field(),
            preserve_default=False,
        ),
        migrations.RunPython(rename_names_that_read_alike, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='apitoken',
            name='name',
            field=models.CharField(help_text='Who or what uses it.', max_length=100, unique=True, validators=[django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'A token name cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True), django.core.validators.RegexValidator('[\\u00ad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u115f-\\u1160\\u17b4-\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U00013438\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0000-\\U000e0fff]', 'A token name cannot contain an invisible or format character (a zero-width space or joiner, a byte order mark, a bidirectional control such as the right-to-left override, a combining grapheme joiner): it would read like another name.', code='invisible_character_in_name', inverse_match=True), django.core.validators.RegexValidator('\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z', 'A token name cannot be blank or begin or end with a space.', code='padded_name', inverse_match=True)]),
        ),
        migrations.AlterField(
            model_name='blackout',
            name='name',
            field=models.CharField(help_text='Shown on every slot it skips, e.g. release-freeze.', max_length=100, unique=True, validators=[django.core.validators.RegexValidator('/', "A blackout window's name cannot contain '/': it is part of the API's URLs (/api/blackouts/<name>).", code='slash_in_name', inverse_match=True), django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', "A blackout window's name cannot contain a line break or another control character.", code='control_character_in_name', inverse_match=True), django.core.validators.RegexValidator('[\\u00ad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u115f-\\u1160\\u17b4-\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U00013438\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0000-\\U000e0fff]', "A blackout window's name cannot contain an invisible or format character (a zero-width space or joiner, a byte order mark, a bidirectional control such as the right-to-left override, a combining grapheme joiner): it would read like another name.", code='invisible_character_in_name', inverse_match=True), django.core.validators.RegexValidator('\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z', "A blackout window's name cannot be blank or begin or end with a space.", code='padded_name', inverse_match=True)]),
        ),
        migrations.AlterField(
            model_name='job',
            name='name',
            field=models.CharField(help_text='Unique name of this job, e.g. nightly-report.', max_length=190, unique=True, validators=[django.core.validators.RegexValidator('/', "A job name cannot contain '/': it is part of the API's URLs (/api/jobs/<name>).", code='slash_in_name', inverse_match=True), django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'A job name cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True), django.core.validators.RegexValidator('[\\u00ad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u115f-\\u1160\\u17b4-\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U00013438\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0000-\\U000e0fff]', 'A job name cannot contain an invisible or format character (a zero-width space or joiner, a byte order mark, a bidirectional control such as the right-to-left override, a combining grapheme joiner): it would read like another name.', code='invisible_character_in_name', inverse_match=True), django.core.validators.RegexValidator('\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z', 'A job name cannot be blank or begin or end with a space.', code='padded_name', inverse_match=True)]),
        ),
        migrations.AddConstraint(
            model_name='apitoken',
            constraint=models.CheckConstraint(condition=models.Q(('name__regex', '[\\u00ad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u115f-\\u1160\\u17b4-\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U00013438\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0000-\\U000e0fff]'), _negated=True), name='token_name_visible'),
        ),
        migrations.AddConstraint(
            model_name='apitoken',
            constraint=models.UniqueConstraint(fields=('name_skeleton',), name='token_name_reads_alike'),
        ),
        migrations.AddConstraint(
            model_name='blackout',
            constraint=models.CheckConstraint(condition=models.Q(('name__regex', '[\\u00ad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u115f-\\u1160\\u17b4-\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U00013438\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0000-\\U000e0fff]'), _negated=True), name='blackout_name_visible'),
        ),
        migrations.AddConstraint(
            model_name='blackout',
            constraint=models.UniqueConstraint(fields=('name_skeleton',), name='blackout_name_reads_alike'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('name__regex', '[\\u00ad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u115f-\\u1160\\u17b4-\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufffb\\U000110bd\\U000110cd\\U00013430-\\U00013438\\U0001bca0-\\U0001bca3\\U0001d173-\\U0001d17a\\U000e0000-\\U000e0fff]'), _negated=True), name='job_name_visible'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.UniqueConstraint(fields=('name_skeleton',), name='job_name_reads_alike'),
        ),
    ]
