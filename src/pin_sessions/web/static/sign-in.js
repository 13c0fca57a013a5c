// Sign-in by a one-time code sent to a phone, shared by the dashboard and the demo.
//
// The phone step asks for the number and sends the code by SMS; the code step takes the
// code the user types (or the browser fills in: autocomplete="one-time-code", and the
// WebOTP API where the browser has it). On a development server (PIN_DEV_CODES=1) the code
// can also be read from `GET /dev/sign-in-codes/{requestId}`, which the pages offer as a
// one-click sign-in; that route never exists in prod. The server says which it is in the
// page itself (`<body data-dev-codes="true">`), so nothing is probed.

/** An API failure: HTTP status, the problem+json `code`, and `Retry-After` in seconds. */
export class ApiError extends Error {
  constructor(status, problem, retryAfter = null) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code ?? null;
    this.retryAfter = retryAfter;
  }
}

export async function requestJson(path, { method = "GET", body, headers = {} } = {}) {
  const init = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, { code: "NETWORK", detail: "The service cannot be reached." });
  }
  const text = await response.text();
  let payload = null;
  try {
    payload = text ? JSON.parse(text) : null;
  } catch {
    payload = null; // a proxy's HTML error page: the status still says what happened
  }
  if (!response.ok) {
    const retryAfter = Number.parseInt(response.headers.get("Retry-After") ?? "", 10);
    throw new ApiError(response.status, payload, Number.isNaN(retryAfter) ? null : retryAfter);
  }
  return payload;
}

export function requestCode(phoneNumber) {
  return requestJson("/api/identity/sign-in/requests", { method: "POST", body: { phoneNumber } });
}

export function confirmCode(requestId, code, { anonymousId } = {}) {
  return requestJson("/api/identity/sign-in/confirm", {
    method: "POST",
    body: { requestId, code },
    headers: anonymousId ? { "X-Anonymous-Id": anonymousId } : {},
  });
}

/** The development code of a request; null where PIN_DEV_CODES is off. */
export async function devCode(requestId) {
  try {
    return (await requestJson(`/dev/sign-in-codes/${requestId}`)).code;
  } catch (error) {
    if (error.status === 404) return null;
    throw error;
  }
}

/** Whether this server shows development codes, as it rendered into the page. */
export function devCodesAvailable() {
  return document.body.dataset.devCodes === "true";
}

export function refreshTokens(refreshToken) {
  return requestJson("/api/identity/sessions/refresh", {
    method: "POST",
    body: { refreshToken },
  });
}

export function logout(accessToken) {
  return requestJson("/api/identity/sessions/logout", {
    method: "POST",
    headers: { Authorization: `Bearer ${accessToken}` },
  });
}

function inWords(seconds) {
  if (!seconds) return "a little while";
  if (seconds < 90) return `${seconds} seconds`;
  const minutes = Math.ceil(seconds / 60);
  return minutes < 90 ? `${minutes} minutes` : `${Math.ceil(minutes / 60)} hours`;
}

// Every error the two sign-in calls answer (SPEC §4, §8), as a person would want it said.
// `restart`: the request is spent, so the page goes back to the phone step.
const EXPLANATIONS = {
  IDENTITY_CONFIRMATION_INVALID_CODE: () => ({
    message: "That code is not right. Check the SMS and try again.",
  }),
  IDENTITY_CONFIRMATION_EXPIRED: () => ({
    message: "This code has expired (codes last 5 minutes). Ask for a new one.",
    restart: true,
  }),
  IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED: () => ({
    message: "Too many wrong codes for this SMS. Ask for a new code.",
    restart: true,
  }),
  IDENTITY_CONFIRMATION_ALREADY_USED: () => ({
    message: "This code has already been used. Ask for a new one to sign in again.",
    restart: true,
  }),
  IDENTITY_CONFIRMATION_NOT_FOUND: () => ({
    message: "This sign-in request is not known (any more). Ask for a new code.",
    restart: true,
  }),
  USER_ACTIVITY_ANONYMOUS_ID_INVALID: () => ({
    message: "This browser's device id is not valid. Reload the page and try again.",
    restart: true,
  }),
  IDENTITY_TOO_MANY_REQUESTS: (error) => ({
    message: `Too many codes were asked for. Try again in ${inWords(error.retryAfter)}.`,
  }),
  IDENTITY_CODE_DELIVERY_FAILED: () => ({
    message: "The SMS could not be sent just now. Try again in a moment.",
  }),
  SERVICE_UNAVAILABLE: () => ({ message: "The service is busy. Try again in a moment." }),
  PAYLOAD_TOO_LARGE: () => ({ message: "That is too long to send. Check what you typed." }),
  NETWORK: () => ({ message: "The service cannot be reached. Check the connection and retry." }),
};

/** What to tell the user about a failed sign-in call: `{message, restart}`. */
export function explain(error, step) {
  const known = EXPLANATIONS[error?.code];
  if (known) return { restart: false, ...known(error) };
  if (error?.status === 422 || error?.status === 400) {
    return step === "phone"
      ? { message: "Enter the number in international format, e.g. +447911123456.", restart: false }
      : { message: "Enter the code as the SMS shows it: six digits.", restart: false };
  }
  if (error?.status === 429) {
    return { message: `Too many tries. Try again in ${inWords(error.retryAfter)}.`, restart: false };
  }
  return { message: `Sign-in did not work (${error?.message ?? error}). Try again.`, restart: false };
}

/**
 * Wire a page's sign-in forms. Elements by id: `sign-in-form` (the phone step: `phone`,
 * `send-code`, and `sign-in`, the development one-click, shown only where PIN_DEV_CODES=1)
 * and `code-form` (the code step: `code`, `confirm-code`, `resend-code`, `change-phone`).
 *
 * `say(message, {error})` shows progress; `onSignedIn(tokens)` takes over once signed in;
 * `anonymousId()` names the device to link (or null); `beforeDeveloperSignIn(phone)` runs
 * before the one-click sign-in (the dashboard grants its permission there).
 */
export function mountSignIn({ say, onSignedIn, anonymousId = async () => null, beforeDeveloperSignIn = async () => {}, developerPhone = "" }) {
  const $ = (id) => document.getElementById(id);
  let pending = null; // { requestId, phoneNumber } between the two steps
  let otpListener = null;

  function showPhoneStep() {
    otpListener?.abort();
    pending = null;
    $("sign-in-form").hidden = false;
    $("code-form").hidden = true;
  }

  function showCodeStep(request, phoneNumber) {
    pending = { requestId: request.requestId, phoneNumber };
    $("sign-in-form").hidden = true;
    $("code-form").hidden = false;
    $("code").value = "";
    $("code").focus();
    otpListener = listenForSmsCode();
  }

  function phoneNumber() {
    return $("phone").value.trim();
  }

  async function busy(work) {
    for (const id of ["send-code", "sign-in", "confirm-code", "resend-code"]) $(id).disabled = true;
    try {
      await work();
    } finally {
      for (const id of ["send-code", "sign-in", "confirm-code", "resend-code"]) $(id).disabled = false;
    }
  }

  async function sendCode(number) {
    say("Sending a code…");
    try {
      const request = await requestCode(number);
      showCodeStep(request, number);
      say(`A code is on its way to the number ending ${number.slice(-2)}; it is valid for 5 minutes.`);
      return request;
    } catch (error) {
      say(explain(error, "phone").message, { error: true });
      return null;
    }
  }

  async function confirm(code) {
    say("Signing in…");
    try {
      const tokens = await confirmCode(pending.requestId, code, { anonymousId: await anonymousId() });
      showPhoneStep();
      await onSignedIn(tokens);
    } catch (error) {
      const { message, restart } = explain(error, "code");
      if (restart) showPhoneStep();
      else {
        $("code").value = "";
        $("code").focus();
      }
      say(message, { error: true });
    }
  }

  function listenForSmsCode() {
    // WebOTP: with PIN_SMS__WEBOTP_DOMAIN set, the SMS ends in `@domain #code` and a browser
    // that supports it hands the code over; elsewhere autocomplete="one-time-code" offers it.
    if (!("OTPCredential" in window)) return null;
    const listener = new AbortController();
    navigator.credentials
      .get({ otp: { transport: ["sms"] }, signal: listener.signal })
      .then((otp) => {
        if (otp?.code && pending) {
          $("code").value = otp.code;
          $("code-form").requestSubmit();
        }
      })
      .catch(() => {});
    return listener;
  }

  $("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    // A code goes only to a number the user typed, never to one the page made up.
    if (!phoneNumber()) {
      say("Type your phone number first, e.g. +447911123456.", { error: true });
      $("phone").focus();
      return;
    }
    busy(() => sendCode(phoneNumber()));
  });
  $("code-form").addEventListener("submit", (event) => {
    event.preventDefault();
    otpListener?.abort();
    busy(() => confirm($("code").value.trim()));
  });
  $("resend-code").addEventListener("click", () => busy(() => sendCode(pending?.phoneNumber ?? phoneNumber())));
  $("change-phone").addEventListener("click", () => {
    showPhoneStep();
    say("");
    $("phone").focus();
  });
  $("sign-in").addEventListener("click", () =>
    busy(async () => {
      const number = phoneNumber() || developerPhone; // the one-click signs the developer in
      try {
        await beforeDeveloperSignIn(number);
      } catch (error) {
        say(explain(error, "phone").message, { error: true });
        return;
      }
      const request = await sendCode(number);
      if (!request) return;
      const code = await devCode(request.requestId);
      if (code === null) {
        say("Development codes are off on this server: type the code from the SMS.");
        return;
      }
      $("code").value = code;
      await confirm(code);
    }),
  );
  $("sign-in").hidden = !devCodesAvailable();
  showPhoneStep();
}
