from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from corral.django import enqueue_on_commit
from orders.models import Order


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    try:
        with transaction.atomic():
            order = Order.objects.create(
                item=request.POST["item"], quantity=int(request.POST["quantity"])
            )
            # Added once the transaction commits: never for an order that is rolled back.
            enqueue_on_commit(settings.ORDERS_QUEUE, "confirm", {"order": order.pk}, attempts=3)
            if order.quantity <= 0:
                raise ValueError("quantity must be positive")  # rolls back order and job
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"order": order.pk}, status=201)


@require_GET
def order_status(request: HttpRequest, pk: int) -> JsonResponse:
    order = Order.objects.get(pk=pk)
    return JsonResponse({"order": order.pk, "status": order.status})
