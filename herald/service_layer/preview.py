"""Previewing a campaign's message for one device, without sending it.

The preview is made by the code the sender runs (``compile_content`` and ``message_for``), from
the device as registered, so that what it shows is byte for byte the request a sender would
make (only the APNs expiry a TTL gives differs: a sender dates it when its request starts, the
preview when it is made; and the token is masked). A retired device (FCM refused its token) is
no device a campaign reaches: it is not previewed."""

from __future__ import annotations

import time
from functools import partial

import orjson

from herald.contracts.http import Preview, PreviewDevice, PreviewRequest
from herald.domain.access import masked_token
from herald.domain.documents import CampaignContent, Device
from herald.domain.payload import LONGEST_DEFAULT_KEY
from herald.domain.rendering import DEFAULT_VARIANT, DeviceMessage, compile_content
from herald.service_layer.campaigns import content_of
from herald.service_layer.errors import CampaignNotFound
from herald.service_layer.ports import CampaignLookup, DeviceRepository, Offload


class DeviceNotFound(LookupError):
    def __init__(self, request: PreviewRequest, *, retired: bool = False) -> None:
        which = f"token {request.token!r}" if request.token else f"user_id {request.user_id!r}"
        super().__init__(
            f"the device with {which} is retired (FCM no longer takes its token): a preview "
            "shows only devices a campaign reaches" if retired
            else f"no device a campaign reaches is registered with {which}")


async def preview(campaigns: CampaignLookup, devices: DeviceRepository, offload: Offload,
                  request: PreviewRequest) -> Preview:
    """The message ``request``'s device would get from ``request``'s content or campaign.
    Compiling the content (every variant's templates: up to a second for the largest) is
    ``offload``'s, off the event loop."""
    device = await (devices.find_by_token(request.token) if request.token
                    else devices.find_by_user_id(request.user_id or ""))
    if device is None or device.invalid:
        raise DeviceNotFound(request, retired=device is not None)
    content, replace_key = await _content(campaigns, request)
    return await offload(partial(_made, device, content, replace_key))


def _made(device: Device, content: CampaignContent, replace_key: str) -> Preview:
    compiled = compile_content(content.title, content.body, content.data, content.translations,
                               image_url=content.image_url, options=content.options,
                               replace_key=replace_key)
    return _preview(device, compiled.message_for(device.token, device), time.time())


async def _content(campaigns: CampaignLookup,
                   request: PreviewRequest) -> tuple[CampaignContent, str]:
    """The content previewed and the replacement key it is sent with."""
    if request.content is not None:
        return content_of(request.content), request.content.replace_key or LONGEST_DEFAULT_KEY
    campaign = await campaigns.get(request.campaign_id or "")
    if campaign is None:
        raise CampaignNotFound(request.campaign_id or "")
    return campaign.content, campaign.sent_with_key


def _preview(device: Device, made: DeviceMessage, now_s: float) -> Preview:
    """The preview of ``made`` for ``device``, its token masked (a preview is for reading the
    words; the token is nobody's to copy from it)."""
    shown = PreviewDevice(token=masked_token(device.token), user_id=device.user_id,
                          platform=device.platform, locale=device.locale,
                          timezone=device.timezone)
    variant = made.variant or DEFAULT_VARIANT
    if made.body is None:
        return Preview(device=shown, variant=variant, message=None, size_bytes=None,
                       failure=made.failure, failure_code=made.code)
    message = orjson.loads(made.body.at(now_s))["message"]
    size = len(orjson.dumps({key: value for key, value in message.items() if key != "token"}))
    message["token"] = masked_token(message["token"])
    return Preview(device=shown, variant=variant, message=message, size_bytes=size)
