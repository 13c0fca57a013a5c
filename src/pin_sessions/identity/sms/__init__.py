"""Sign-in codes by SMS: one gateway per process, chosen by ``PIN_SMS__PROVIDER``.

``client`` is the bounded, retrying HTTP client every gateway shares; ``webhook``,
``twilio`` and ``smsru`` each speak one provider's documented API; ``gateway`` has the
port and the development ``log`` gateway; ``sender`` composes the text and measures.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pin_sessions.identity.sms.client import GatewayClient
from pin_sessions.identity.sms.gateway import LogGateway, SmsGateway
from pin_sessions.identity.sms.sender import DevelopmentPhone, SmsCodeSender, SmsMetrics
from pin_sessions.identity.sms.smsru import SmsRuGateway
from pin_sessions.identity.sms.twilio import TwilioGateway
from pin_sessions.identity.sms.webhook import WebhookGateway
from pin_sessions.settings import Environment, Settings, SmsProvider, SmsSettings


def build_code_sender(settings: Settings, registry: CollectorRegistry) -> SmsCodeSender:
    """The sender of ``PIN_SMS__*``; settings validation has made sure its credentials are set."""
    options = settings.sms
    return SmsCodeSender(
        build_gateway(options),
        SmsMetrics.register(registry),
        template=options.template,
        webotp_domain=options.webotp_domain,
        development_phone=development_phone(settings),
    )


def development_phone(settings: Settings) -> DevelopmentPhone | None:
    """The log as the phone: ``PIN_ENV=dev`` with the ``log`` gateway, and nowhere else."""
    if settings.env is not Environment.DEV or settings.sms.provider is not SmsProvider.LOG:
        return None
    return DevelopmentPhone(settings.effective_public_url, bool(settings.dev_codes))


def build_gateway(options: SmsSettings) -> SmsGateway:
    client = GatewayClient(options.timeout)
    if options.provider is SmsProvider.WEBHOOK:
        assert options.webhook_url is not None and options.webhook_secret is not None
        secret = options.webhook_secret.get_secret_value().encode()
        return WebhookGateway(client, options.webhook_url, secret)
    if options.provider is SmsProvider.TWILIO:
        assert options.twilio_account_sid and options.twilio_auth_token and options.twilio_from
        return TwilioGateway(
            client,
            options.twilio_base_url,
            account_sid=options.twilio_account_sid,
            auth_token=options.twilio_auth_token.get_secret_value(),
            sender=options.twilio_from,
        )
    if options.provider is SmsProvider.SMSRU:
        assert options.smsru_api_id is not None
        return SmsRuGateway(
            client, options.smsru_base_url, api_id=options.smsru_api_id.get_secret_value()
        )
    return LogGateway()
