// Debounced "query as you type" with cancellation of stale requests. No `vscode` import:
// the token source is injected (vscode.CancellationTokenSource in the editor, the one from
// vscode-jsonrpc in the tests).

export interface TokenLike {
  readonly isCancellationRequested: boolean;
}

export interface TokenSourceLike<T extends TokenLike = TokenLike> {
  readonly token: T;
  cancel(): void;
  dispose(): void;
}

export interface Timers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface LiveQueryOptions<T, Token extends TokenLike> {
  /** Sends the request; gets a token that is cancelled when a newer value arrives. */
  run: (value: string, token: Token) => Promise<T>;
  /** Called with the response to the latest value only. */
  onResult: (value: string, result: T) => void;
  onError: (value: string, error: unknown) => void;
  /** Called with true when a request starts and false when nothing is pending. */
  onBusy?: (busy: boolean) => void;
  createTokenSource: () => TokenSourceLike<Token>;
  delayMs?: number;
  timers?: Timers;
}

export const DEFAULT_DELAY_MS = 200;

/**
 * Runs `run` for the latest value once the input has been still for `delayMs`, cancelling the
 * request in flight for an older value; results of stale requests are never delivered.
 */
export class LiveQuery<T, Token extends TokenLike = TokenLike> {
  private timer: unknown;
  private current: TokenSourceLike<Token> | undefined;
  private generation = 0;
  private disposed = false;
  private readonly timers: Timers;

  constructor(private readonly options: LiveQueryOptions<T, Token>) {
    this.timers = options.timers ?? {
      setTimeout: (callback, ms) => setTimeout(callback, ms),
      clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
    };
  }

  /** A new input value: restarts the debounce and cancels the pending request. */
  update(value: string): void {
    if (this.disposed) {
      return;
    }
    this.cancelPending();
    const generation = ++this.generation;
    this.timer = this.timers.setTimeout(() => {
      this.timer = undefined;
      void this.fire(value, generation);
    }, this.options.delayMs ?? DEFAULT_DELAY_MS);
  }

  /** Runs the query for `value` now, without waiting (e.g. for an initial value). */
  now(value: string): Promise<void> {
    this.cancelPending();
    return this.fire(value, ++this.generation);
  }

  dispose(): void {
    this.cancelPending();
    this.disposed = true;
  }

  private cancelPending(): void {
    if (this.timer !== undefined) {
      this.timers.clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.current !== undefined) {
      this.current.cancel();
      this.current.dispose();
      this.current = undefined;
      this.options.onBusy?.(false);
    }
  }

  private async fire(value: string, generation: number): Promise<void> {
    if (this.disposed) {
      return;
    }
    const source = this.options.createTokenSource();
    this.current = source;
    this.options.onBusy?.(true);
    const isLatest = () => !this.disposed && generation === this.generation && !source.token.isCancellationRequested;
    try {
      const result = await this.options.run(value, source.token);
      if (isLatest()) {
        this.options.onResult(value, result);
      }
    } catch (error) {
      if (isLatest()) {
        this.options.onError(value, error);
      }
    } finally {
      if (this.current === source) {
        this.current = undefined;
        source.dispose();
        this.options.onBusy?.(false);
      }
    }
  }
}
