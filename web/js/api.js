// The REST API client. Only same-origin relative URLs; no other network access.

export class ApiError extends Error {
  /** status 0: the daemon could not be reached. */
  constructor(message, status = 0, body = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.body = body;
  }
}

/**
 * GET a JSON endpoint. Resolves to {body, text, status}. `accept` lists extra
 * statuses whose JSON body is still the answer (health answers 503 with its
 * full body when the database is down). Errors: ApiError with the API's own
 * {"error": "..."} message when it sent one.
 */
export async function getJSON(path, { signal, accept = [] } = {}) {
  let res;
  try {
    res = await fetch(path, { signal, cache: 'no-store', headers: { Accept: 'application/json' } });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError('cannot reach numwatchd: ' + (e && e.message ? e.message : 'network error'), 0);
  }
  const text = await res.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (!res.ok && !(accept.includes(res.status) && body && typeof body === 'object')) {
    const msg = body && typeof body.error === 'string' ? body.error : `HTTP ${res.status} ${res.statusText}`.trim();
    throw new ApiError(msg, res.status, body);
  }
  if (body === null || typeof body !== 'object') {
    throw new ApiError(`the answer of ${path} is not JSON`, res.status);
  }
  return { body, text, status: res.status };
}

/** GET a text endpoint (build logs). */
export async function getText(path, { signal } = {}) {
  let res;
  try {
    res = await fetch(path, { signal, cache: 'no-store' });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError('cannot reach numwatchd: ' + (e && e.message ? e.message : 'network error'), 0);
  }
  const text = await res.text();
  if (!res.ok) {
    let msg = `HTTP ${res.status}`;
    try {
      const b = JSON.parse(text);
      if (b && typeof b.error === 'string') msg = b.error;
    } catch {
      /* not JSON */
    }
    throw new ApiError(msg, res.status);
  }
  return text;
}
