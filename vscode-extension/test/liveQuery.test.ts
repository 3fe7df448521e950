import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CancellationTokenSource } from 'vscode-jsonrpc';
import { LiveQuery, type TokenLike } from '../src/liveQuery';

/** Timers the test advances by hand. */
function manualTimers() {
  let next = 1;
  const pending = new Map<number, { at: number; callback: () => void }>();
  let now = 0;
  return {
    timers: {
      setTimeout: (callback: () => void, ms: number) => {
        const id = next++;
        pending.set(id, { at: now + ms, callback });
        return id;
      },
      clearTimeout: (handle: unknown) => {
        pending.delete(handle as number);
      },
    },
    advance(ms: number) {
      now += ms;
      for (const [id, timer] of [...pending]) {
        if (timer.at <= now) {
          pending.delete(id);
          timer.callback();
        }
      }
    },
    get pendingCount() {
      return pending.size;
    },
  };
}

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

function setup() {
  const clock = manualTimers();
  const calls: { value: string; token: TokenLike; reply: Deferred<string> }[] = [];
  const results: string[] = [];
  const errors: unknown[] = [];
  const busy: boolean[] = [];
  const live = new LiveQuery<string>({
    run: (value, token) => {
      const reply = deferred<string>();
      calls.push({ value, token, reply });
      return reply.promise;
    },
    onResult: (_value, result) => results.push(result),
    onError: (_value, error) => errors.push(error),
    onBusy: (b) => busy.push(b),
    createTokenSource: () => new CancellationTokenSource(),
    delayMs: 200,
    timers: clock.timers,
  });
  return { clock, calls, results, errors, busy, live };
}

describe('LiveQuery', () => {
  it('debounces keystrokes into one request for the last value', async () => {
    const { clock, calls, results, live } = setup();
    for (const value of ['l', 'li', 'lig', 'light']) {
      live.update(value);
      clock.advance(50);
    }
    assert.equal(calls.length, 0);
    clock.advance(200);
    assert.deepEqual(calls.map((c) => c.value), ['light']);
    calls[0].reply.resolve('R(light)');
    await flush();
    assert.deepEqual(results, ['R(light)']);
  });

  it('cancels the request in flight when the value changes and drops its late answer', async () => {
    const { clock, calls, results, live } = setup();
    live.update('storm');
    clock.advance(200);
    assert.equal(calls.length, 1);
    live.update('storm at sea');
    assert.equal(calls[0].token.isCancellationRequested, true);
    clock.advance(200);
    assert.equal(calls.length, 2);
    calls[0].reply.resolve('stale');
    calls[1].reply.resolve('fresh');
    await flush();
    assert.deepEqual(results, ['fresh']);
  });

  it('reports errors of the latest request only', async () => {
    const { clock, calls, errors, live } = setup();
    live.update('a');
    clock.advance(200);
    live.update('b');
    clock.advance(200);
    calls[0].reply.reject(new Error('cancelled'));
    calls[1].reply.reject(new Error('boom'));
    await flush();
    assert.equal(errors.length, 1);
    assert.equal((errors[0] as Error).message, 'boom');
  });

  it('now() runs at once; busy goes true then false', async () => {
    const { calls, results, busy, live } = setup();
    const done = live.now('keeper');
    assert.equal(calls.length, 1);
    calls[0].reply.resolve('R');
    await done;
    assert.deepEqual(results, ['R']);
    assert.deepEqual(busy, [true, false]);
  });

  it('dispose cancels everything and ignores later updates', async () => {
    const { clock, calls, results, live } = setup();
    live.update('x');
    clock.advance(200);
    live.dispose();
    assert.equal(calls[0].token.isCancellationRequested, true);
    live.update('y');
    clock.advance(500);
    assert.equal(calls.length, 1);
    calls[0].reply.resolve('late');
    await flush();
    assert.deepEqual(results, []);
    assert.equal(clock.pendingCount, 0);
  });
});
