// Sign-in through the phone-code flow, reading the code from the development endpoint
// `GET /dev/sign-in-codes/{requestId}` (present only with PIN_DEV_CODES=1, never in prod).

/** An API failure carrying the problem+json `code` and the HTTP status. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code ?? null;
  }
}

export async function requestJson(path, { method = "GET", body, headers = {} } = {}) {
  const init = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  const payload = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, payload);
  return payload;
}

/** Sign in as `phoneNumber`; with `anonymousId`, identity links the device's session too. */
export async function signInWithDevCode(phoneNumber, { anonymousId } = {}) {
  const request = await requestJson("/api/identity/sign-in/requests", {
    method: "POST",
    body: { phoneNumber },
  });
  let code;
  try {
    ({ code } = await requestJson(`/dev/sign-in-codes/${request.requestId}`));
  } catch (error) {
    if (error.status === 404) {
      throw new Error("Development sign-in codes are off: start the service with PIN_DEV_CODES=1.");
    }
    throw error;
  }
  const headers = anonymousId ? { "X-Anonymous-Id": anonymousId } : {};
  return requestJson("/api/identity/sign-in/confirm", {
    method: "POST",
    body: { requestId: request.requestId, code },
    headers,
  });
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
