"""The newsletter's views: a form post enqueues the word count, as Django's docs enqueue a task
from a view, and a page reads its result back through the Tasks API."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.tasks import TaskResultStatus  # type: ignore[import-not-found,unused-ignore]
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from tests.support.newsletter.tasks import count_words


@csrf_exempt
@require_POST
def count(request: HttpRequest) -> JsonResponse:
    queue = request.POST.get("queue")
    counting = count_words.using(queue_name=queue) if queue else count_words
    result = counting.enqueue(request.POST["text"])
    return JsonResponse({"id": result.id, "status": result.status}, status=202)


@require_GET
def counted(request: HttpRequest, result_id: str) -> JsonResponse:
    result = count_words.get_result(result_id)
    words = result.return_value["words"] if result.status == TaskResultStatus.SUCCESSFUL else None
    return JsonResponse({"status": result.status, "words": words})
